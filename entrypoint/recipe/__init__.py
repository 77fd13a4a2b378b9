"""Recipes: the registry of keys, the typed owned settings, the layered KEY=VALUE files, the typed
`swift rlhf` / `swift rollout` arguments and ms-swift's schema; `import` of an ms-swift command line."""
