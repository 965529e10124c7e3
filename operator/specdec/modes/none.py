"""No speculation: the target alone."""

from specdec.modes.mode import Mode

MODE: Mode[None] = Mode("none", "no speculation: the target model alone")
