"""The Faust app and one module per pipeline stage.

Stage logic lives in plain functions (`logic.py`, `extract.py`, ...); the
agents only iterate, batch, call that logic, write and forward.
"""
