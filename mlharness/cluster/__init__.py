"""Work made of many runs, spread over the machines that can run them.

An executor (``executor.py``) takes run jobs (``jobs.py``: one LoadGen test each, as an ``mlharness`` command
line, with the constraints of the node it needs) and runs each on a node that meets them, one LoadGen test per
process, bringing every run folder back into the one results tree on the driver. Backends: ``local`` (this
machine, today's behaviour) and ``ray`` (a Ray cluster: Ray places the work, mlharness never schedules it
itself). Campaigns (``campaign.py``) expand a YAML file of models × scenarios × modes × systems into jobs.
"""
