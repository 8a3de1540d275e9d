"""Portable weights: a run's model as a folder any torch can load, without mw-env (issue 38).

    <run>/weights/step-XXXXXXXXX/   model.safetensors, config.json, modeling_mw_tagger.py (trainer/network.py
                                    verbatim), mw_tagger.py (trainer/export/runtime.py verbatim), tokenizer.model
                                    (SentencePiece runs only): docs/training.md "Portable weights" says what each
                                    holds, with the ~20-line torch snippet that loads a folder (a test runs it)

- folder: describe and write one (atomically: base/atomic.atomic_dir), and the run's hook (runtime.portable_weights)
- load: read one back in mw-env (predict --weights, init_from) with mw-env's own network code, checked
- initfrom: model.init_from, a fine-tune's start (the same or a larger label set, mapped by name)
- export: `python -m mw_env.trainer.weights.export RUN` (`mw-env train export --format safetensors RUN`)
"""
