"""Rule-based reward functions (``reward=<name>``): each scores a Batch's ``response_text``."""
