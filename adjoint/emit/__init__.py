"""Emission: print trees as commented Python source and assemble modules."""
