"""How a run is sized before LoadGen starts: the calibrated expected performance, the Server latency bound and the
rate probe, estimates of how long a run takes, and the explanations of an INVALID result."""
