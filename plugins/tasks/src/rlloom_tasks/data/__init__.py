"""Prompt datasets (``data=<name>``): each factory returns disjoint train and val prompt lists."""
