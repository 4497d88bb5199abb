"""The simulated backend: a cluster on a virtual clock for the same scheduler code.
"""
