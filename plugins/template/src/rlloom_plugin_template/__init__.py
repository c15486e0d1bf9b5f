"""A template rlloom plugin: a toy algorithm and a toy reward."""
