"""Pure decision logic: search spaces, algorithms, the study controller.

Nothing here imports torch, ray or subprocess, reads the wall clock or touches a global RNG;
time and randomness are passed in. ``tests/core/test_boundary.py`` keeps this honest.
"""
