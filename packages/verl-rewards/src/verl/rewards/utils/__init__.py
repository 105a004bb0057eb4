"""Helpers shared by the scorers and managers."""
