"""Code shared by test modules (and the benchmarks): no test module imports another."""
