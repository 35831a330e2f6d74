"""Middle-end passes: normalize, types, ssa, activity, reverse."""
