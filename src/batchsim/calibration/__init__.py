"""Calibration: measure GPU operators, fit the roofline's efficiencies, report the fit error.

Kept import-light: `gpu.hardware` imports `record` from here, and torch is only imported inside
the measurement functions.
"""
