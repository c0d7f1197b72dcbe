"""Every use of a library's internals, one module per library (see each).

A patch or a read of a private name goes here, with the release it was
written for and the objects it relies on (tests/compat/test_pins.py).
"""
