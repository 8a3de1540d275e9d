"""Where packages come from: uv, the package indexes (indexlist, freshness), wheelhouses, Pythons."""
