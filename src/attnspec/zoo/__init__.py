"""attnspec.zoo: reference attention models for neural signals, simulated EEG, training, checkpoints.

Modules: :mod:`.eeg_sim` (simulated motor-imagery EEG), :mod:`.eeg_io` (MNE write/read, BCI IV 2a
loader), :mod:`.attention` (the recording attention primitive), the models :mod:`.anisotropic`,
:mod:`.staged`, :mod:`.spd`, :mod:`.diffuse`, and :mod:`.train`.
"""
