"""The decisions: `build.build(recipe, inventory, facts) -> Plan`, pure functions in named stages (layout,
NCCL, budget, batch shape, memory and speed models). Nothing here reads the world."""
