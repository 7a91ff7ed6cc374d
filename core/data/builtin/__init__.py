"""Built-in samples: real data, made on the fly from what installed packages ship, for a run
whose user gave none.

Nothing is downloaded and nothing is stored in the repository: photographs bundled in
scikit-learn's wheel (and scikit-image's, when it is installed) cropped to the model's size
(`photos`), text rendered with the system's DejaVu fonts or Pillow's own (`rendered`), words and
sentences from Python's standard-library docstrings (`corpus`, hashed to ids by `tokens`), bytes
of the standard library's files (`files`) and, as no installed package ships recorded speech,
synthetic speech-like audio (`audio`). `kinds` decides which set suits each model input,
`scaling` how images become input values, and `dataset.BuiltinDataset` feeds them in the shapes
the run would feed random inputs in, saying what it holds ("built-in samples: x: 32 crops of 2
scikit-learn photographs ...").

They are real data, not the user's: a variant judged on them is judged on images, text and
sounds like the ones it will see, in the normalisation chosen for it, which the user's own data
can confirm or refute. A model input with no set here (a feature vector, a state) keeps random
inputs.
"""
