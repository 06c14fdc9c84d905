"""Remote agents: predictors served over the Open Inference Protocol (KServe v2 gRPC).

``server`` serves a manifest's predictor (``mlharness agent serve``), ``batching`` merges concurrent requests,
``client`` is the connection pool the remote predictor and the network QDL share, ``tensors`` converts numpy
arrays to and from the protocol's tensors. Importing this package imports neither grpc nor the stubs.
"""
