"""Measurement beyond one LoadGen run: overhead benches, framework parity, Server tuning and queueing models.

Each module is one question asked of a model or a system:

- ``bench``: harness overhead against the bare pipeline in the same process (``mlharness bench``);
- ``bench_generate``: the same for token-stream models;
- ``bench_server``: the Server ceiling a trial of that length can reach;
- ``queueing``: ideal-queue and replay models of the Server scenario;
- ``parity``: two frameworks' outputs on the same samples;
- ``tune``: the highest VALID Server rate by a search over LoadGen runs;
- ``bench_client``: the ``openai`` client against a bare asyncio client (and ``vllm bench serve``) on the fake
  OpenAI-compatible server of ``fake_openai``/``fake_openai_server``, driven by ``bare_client``;
- ``sweep`` (with ``sweep_plan``, ``goodput``, ``sweep_cli``): the operating curve over target QPS or requests in
  flight, with goodput under SLOs;
- ``compare`` (with ``compare_render``): two result trees or run folders side by side;
- ``coldstart`` (with ``coldstart_child``, one process per trial): the first answer of a process that must load
  its model, step by step.
"""
