"""Privacy mechanisms, each a small frozen object with ``sample(x, *, generator)`` and ``privacy_loss(d_in)``."""

from .accountants import (
    DEFAULT_ACCOUNTANT,
    Accountant,
    Release,
    available_accountants,
    compose,
    create_accountant,
    get_accountant_class,
    register_accountant,
    release_of,
    slot_releases,
)
from .base import (
    Mechanism,
    PrivacyLoss,
    available_mechanisms,
    build_mechanism,
    get_mechanism_class,
    mechanism_from_dict,
    mechanism_to_dict,
    register_mechanism,
)
from .centering import PrivateMean, center_sha256, center_slots, check_center, prompt_mean_slots
from .clipping import Clipped, clip_l2, effective_noise
from .factory import GAUSSIAN_MATCHES, make_noise
from .gaussian import Gaussian, analytic_delta, analytic_epsilon, analytic_sigma, classic_sigma, sigma_for_noise_norm
from .gdp import (
    MATCH_RULES,
    gaussian_mu,
    gdp_equal_error,
    l2_laplace_loss_samples,
    l2_laplace_mu,
    matched_epsilon,
    mechanism_mu,
)
from .laplace import L2Laplace, sample_gamma, sample_gamma_integer_shape, sample_unit_directions
from .slots import UNIT_SLOT_DIAMETER, SlotPrivatization, repeat_mean_slots
from .subspace import check_basis, class_subspace, project_slots
from .transforms import k_pool, l2_normalize, n_slots

__all__ = [
    "Accountant",
    "Release",
    "DEFAULT_ACCOUNTANT",
    "available_accountants",
    "compose",
    "create_accountant",
    "get_accountant_class",
    "register_accountant",
    "release_of",
    "slot_releases",
    "Mechanism",
    "PrivacyLoss",
    "available_mechanisms",
    "build_mechanism",
    "get_mechanism_class",
    "mechanism_from_dict",
    "mechanism_to_dict",
    "register_mechanism",
    "PrivateMean",
    "center_sha256",
    "center_slots",
    "check_center",
    "prompt_mean_slots",
    "check_basis",
    "class_subspace",
    "project_slots",
    "Clipped",
    "clip_l2",
    "effective_noise",
    "GAUSSIAN_MATCHES",
    "make_noise",
    "Gaussian",
    "analytic_sigma",
    "sigma_for_noise_norm",
    "analytic_delta",
    "analytic_epsilon",
    "classic_sigma",
    "L2Laplace",
    "MATCH_RULES",
    "l2_laplace_mu",
    "gaussian_mu",
    "mechanism_mu",
    "gdp_equal_error",
    "matched_epsilon",
    "l2_laplace_loss_samples",
    "sample_gamma",
    "sample_gamma_integer_shape",
    "sample_unit_directions",
    "SlotPrivatization",
    "repeat_mean_slots",
    "UNIT_SLOT_DIAMETER",
    "k_pool",
    "l2_normalize",
    "n_slots",
]
