"""Writes its pid to the file named by its argument, then waits for ever, deaf to SIGTERM (as a
rank whose SIGTERM handler of its own waits on a collective that never returns)."""

import os
import signal
import sys
import time

signal.signal(signal.SIGTERM, signal.SIG_IGN)
with open(sys.argv[1] + ".tmp", "w") as fh:
    fh.write(str(os.getpid()))
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
while True:
    time.sleep(1)
