"""Checkpoints: checkpoint (atomic, hashed with a sha256 sidecar, validated on load), parts (PARTS: what a
checkpoint holds), schema (a loaded checkpoint checked whole).

To add a checkpoint part (a data position, a stream offset, a node count): one row of `parts.PARTS` - its
key, whether it must be there, the test of its value, how the session writes it and how a resume restores
it. Nothing else lists the keys: `Session.save` writes `payload()`, the loop's resume calls `restore()`,
`schema` runs every row's test on each load. A checkpoint written before the part existed must still load
(`required=False`, or a default in its restore), and tests/trainer/test_resume.py resumes bitwise.
"""
