"""The model a user brings: intake (accept or refuse, with the reason), what it declares
(inputs, dims, operators, opsets, FLOPs, declared sizes) and the sample models.

A new check at upload, a new fact on the model card: here.
"""
