"""Portable weights: a run's model as a folder any torch can load, without mw-env (issue 38).

    <run>/weights/step-XXXXXXXXX/
      model.safetensors      the network's state dict, float32 (safetensors: tensors only, no pickle, no code)
      config.json            what the network is and how it reads text: the training config's whole `model`
                             section and the constructor's other arguments (`init`), the labels in logit order
                             (also as id2label / label2id), the id layout, the tokenizer, max_seq_len, where the
                             weights came from, and each file's sha256
      modeling_mw_tagger.py  the network's code: trainer/network.py verbatim (torch + the standard library)
      mw_tagger.py           the encoder, words -> ids: trainer/export/runtime.py verbatim (standard library)
      tokenizer.model        the SentencePiece model, byte for byte (SentencePiece runs only)

- folder: describe and write one (atomically: base/atomic.atomic_dir), and the run's hook (runtime.portable_weights)
- load: read one back in mw-env (predict --weights, init_from) with mw-env's own network code, checked
- initfrom: model.init_from, a fine-tune's start (the same or a larger label set, mapped by name)
- export: `python -m mw_env.trainer.weights.export RUN` (`mw-env train export --format safetensors RUN`)

docs/training.md "Portable weights" has the ~20-line torch snippet that loads a folder; a test runs that text.
"""
