"""The reconciler's bookkeeping, one small object per subject, handed to the controllers that share it."""
