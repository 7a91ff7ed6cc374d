"""The optimization run: recipes (ordered pass lists) and Auto's candidates, each variant made,
checked for accuracy and timed against the original.

A new recipe or a new rule of Auto: here. A new pass goes in `passes/`.
"""
