"""ImageNet-P perturbation sequences (Hendrycks and Dietterich, ICLR 2019): ``p_<name>`` shifts whose output is
a sequence of frames, scored by flip rates (metrics/stability.py). The ten of the benchmark are the group
``imagenet_p``, the four validation extras the group ``imagenet_p_extra``."""

from ._base import DIFFICULTIES, PerturbationSequence, center_crop

__all__ = ["PerturbationSequence", "DIFFICULTIES", "center_crop", "IMAGENET_P", "IMAGENET_P_EXTRA"]

# the published order (the paper's tables)
IMAGENET_P = ("p_gaussian_noise", "p_shot_noise", "p_motion_blur", "p_zoom_blur", "p_snow", "p_brightness",
              "p_translate", "p_rotate", "p_tilt", "p_scale")
IMAGENET_P_EXTRA = ("p_speckle_noise", "p_gaussian_blur", "p_spatter", "p_shear")

from . import blur, digital, geometric, noise, weather  # noqa: E402,F401 - registers the sequences
