"""Hardware descriptions: the fabric and off-chip memory a program is analyzed or simulated on."""

from stepc.hw.config import ConfigError, HardwareConfig, load_config, preset_names

__all__ = ["ConfigError", "HardwareConfig", "load_config", "preset_names"]
