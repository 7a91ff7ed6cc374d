"""Inputs for a model: synthesised from its input specs, a user's .npz, image folders and
zips with their preprocessing, labels, and the `CalibrationSource` protocol they all satisfy.

A new kind of user data (a new file format, a new preprocessing): here.
"""
