"""Encoders (image CNN, text GRU, PVSE) and the loss library."""
