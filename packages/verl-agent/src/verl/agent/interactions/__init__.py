"""Interactions (simulated users / environments) and the built-in GSM8K tutor."""

from verl.agent.interactions.base import BaseInteraction, load_interactions
from verl.agent.interactions.gsm8k import Gsm8kInteraction

__all__ = ["BaseInteraction", "Gsm8kInteraction", "load_interactions"]
