#!/usr/bin/python3
"""Write digits_attributes.csv: a K = 4 multi-hot target table for scikit-learn's digits set (digits.csv.gz, as
Debian's python3-sklearn ships it), row for row. Each handwritten digit d gets four binary attributes:
even (d % 2 == 0), large (d >= 5), prime (d in 2, 3, 5, 7), loop (d in 0, 6, 8, 9: a closed loop when written).
The attributes overlap (6 is even, large and has a loop), so a sample has 0 to 3 positive labels: a multi-label
task on real images with labels derived from the digit class. Columns, no header line (digits.csv.gz has
none, and data.header_lines applies to both tables): even, large, prime, loop. Run from anywhere:
    /usr/bin/python3 configs/data/make_digits_attributes.py
"""
import gzip
import os

SRC = "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz"
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "digits_attributes.csv")

with gzip.open(SRC, "rt") as f, open(OUT, "w") as out:
    for line in f:
        if not line.strip():
            continue
        d = int(float(line.rstrip().split(",")[-1]))
        out.write(f"{int(d % 2 == 0)},{int(d >= 5)},{int(d in (2, 3, 5, 7))},{int(d in (0, 6, 8, 9))}\n")
