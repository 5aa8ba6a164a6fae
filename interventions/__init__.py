"""interventions: how peers influence a model's answer, read from simulate's debate runs.

Behaviour (``chorus influence readout|ablate|cues``, ``experiment.run_influence``): forced-choice
readouts along a receiver's rationale, message ablations, source cues. Inside the model
(``chorus influence knockout|patch|probe``, the ``internals`` sub-package): attention knockout
(``knockout.option_logprobs``, kept stable), residual interchange and probes through nnsight.
See README.md beside this file.
"""
