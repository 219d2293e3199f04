"""Studies built from several simulations of one scenario (e.g. congestion-control comparisons)."""
