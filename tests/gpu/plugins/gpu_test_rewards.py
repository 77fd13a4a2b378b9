"""A reward for the GPU tests' random-weight models: the share of ASCII characters in a completion.

A random-weight model never writes a countdown equation or the format's tags, so those rewards are 0 for
every completion, every group's advantages are 0, and no gradient reaches the adapter (ms-swift logs
grad_norm 0 and LoRA B stays all zero). Random text varies in how much of it is ASCII, so this reward gives
the groups a spread and the GPU tests a real update to check.
"""

from swift.plugin import ORM, orms


class AsciiShare(ORM):
    def __call__(self, completions, **kwargs) -> list[float]:
        return [sum(ch.isascii() for ch in c) / len(c) if c else 0.0 for c in completions]


orms["ascii_share"] = AsciiShare
