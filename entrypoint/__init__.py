"""grpo-rig: GRPO training on consumer GPUs with ms-swift 3.6.4, launched from the hardware it sees."""

__version__ = "0.1.0"
