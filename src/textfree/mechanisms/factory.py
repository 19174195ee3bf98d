"""The one mechanism factory: the noise a client adds for an ``epsilon``, the same wherever it is made.

``textfree privatize --mechanism gaussian --epsilon 28``, a PPFT model whose card says ``gaussian`` at 28, the client
library and the experiments all call :func:`make_noise`, so one epsilon means one distribution. ``epsilon`` is
L2-Laplace's parameter per unit distance (PPFT's convention): a unit slot (diameter 2) released at ``epsilon`` costs
``2 * epsilon``; a Gaussian at ``epsilon`` is calibrated to the same per-slot guarantee (or, ``match="norm"``, to the
same expected noise norm). To build a mechanism from its exact parameters instead (``sigma``), use
:func:`~textfree.mechanisms.base.build_mechanism`.
"""

from __future__ import annotations

from .base import build_mechanism
from .slots import UNIT_SLOT_DIAMETER

__all__: list[str] = ["GAUSSIAN_MATCHES", "make_noise"]


GAUSSIAN_MATCHES = ("budget", "norm")


def make_noise(
    family: str, epsilon: float | None, *, dim: int | None = None, match: str = "budget", delta: float = 1e-5, **params
):
    """The client's mechanism of ``family`` for an L2-Laplace-equivalent ``epsilon`` (None, or family ``none``: no
    noise).

    ``family="gaussian"`` is matched to L2-Laplace at ``epsilon`` on unit slots (diameter 2) in one of two ways:

    * ``match="budget"``: the same formal per-slot guarantee. L2-Laplace gives ``2 * epsilon``-DP per slot, so
      sigma is the exact (analytic, Balle & Wang) calibration of ``(2 * epsilon, delta)``-DP at sensitivity 2.
    * ``match="norm"``: the same expected noise norm ``dim / epsilon`` (L2-Laplace's mean radius); its formal
      guarantee is whatever the payload's ``privacy_loss`` then states (in d = 384 it is a smaller per-slot
      (eps, delta) than L2-Laplace's pure 2*eps: 15.6 vs 56 at eps 28).
    """
    if epsilon is None or family == "none":
        return None
    if family == "gaussian":
        from .gaussian import Gaussian, sigma_for_noise_norm

        if match == "budget":
            return Gaussian.from_epsilon_delta(2.0 * epsilon, delta, UNIT_SLOT_DIAMETER, calibration="analytic")
        if match == "norm":
            if dim is None:
                raise ValueError("make_noise: match='norm' needs the encoder width dim")
            return Gaussian(sigma=sigma_for_noise_norm(dim / epsilon, dim), delta=delta, calibration="analytic")
        raise ValueError(f"make_noise: match must be one of {GAUSSIAN_MATCHES}, got {match!r}")
    return build_mechanism(family, epsilon=epsilon, **params)
