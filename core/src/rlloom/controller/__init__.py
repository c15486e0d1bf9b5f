"""The single controller: launchers place worker roles; the step context drives them."""
