"""The reward-curve PNG written next to a run (matplotlib with the Agg backend, imported lazily).

matplotlib comes with ``verl-core[tracking]``; without it a run trains as usual and says once that it
writes no plot (:func:`plot_available`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

PLOT_INSTALL = "pip install 'verl-core[tracking]'"


def plot_available() -> bool:
    """Whether matplotlib imports here (the plot is a nicety: its absence is not an error)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def plot_reward_curve(
    train: Sequence[tuple[int, float]],
    val: Mapping[str, Sequence[tuple[int, float]]] | None,
    path: str,
    title: str = "",
    shares: Mapping[str, Sequence[tuple[int, float]]] | None = None,
) -> str:
    """Plot the training reward per step (line) and each validation score (markers) to ``path``; with
    ``shares`` (name -> points in [0, 1], e.g. each verdict's share of the scored samples), a second
    panel below shows them, so a kind of failure that takes over is seen next to the reward.

    The file is written to a temporary name and renamed, so a viewer never sees half a PNG.
    """
    import matplotlib

    matplotlib.use("Agg", force=False)  # headless; never open a window
    import matplotlib.pyplot as plt

    shares = {k: v for k, v in (shares or {}).items() if v}
    if shares:
        fig, (ax, ax_shares) = plt.subplots(
            2, 1, figsize=(7, 6.5), dpi=100, sharex=True, height_ratios=(3, 2)
        )
    else:
        fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    try:
        if train:
            xs, ys = zip(*train)
            ax.plot(xs, ys, label="train reward", color="C0")
        for i, (key, points) in enumerate(sorted((val or {}).items())):
            if points:
                xs, ys = zip(*points)
                ax.plot(xs, ys, "o--", label=key, color=f"C{i + 1}")  # never the train curve's colour
        ax.set_ylabel("reward")
        if title:
            ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize="small")
        if shares:
            for key, points in shares.items():
                xs, ys = zip(*points)
                ax_shares.plot(xs, ys, label=key.rsplit("/", 1)[-1])
            ax_shares.set_ylabel("share of samples")
            ax_shares.set_ylim(-0.02, 1.02)
            ax_shares.grid(alpha=0.3)
            ax_shares.legend(loc="upper left", fontsize="x-small", ncol=4)
            ax_shares.set_xlabel("step")
        else:
            ax.set_xlabel("step")
        fig.tight_layout()
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        tmp = path + ".tmp.png"
        fig.savefig(tmp, format="png")
        os.replace(tmp, path)
    finally:
        plt.close(fig)
    return path
