"""Hold a lock while working in steps; stop at once if it is lost.

    python examples/hold.py ./redlock.sock nightly-report   # with the package installed

Then, from another shell, play the operator and take the lock away:

    curl --unix-socket ./redlock-admin.sock -X POST localhost/v1/locks/nightly-report/force-release

and this prints the loss notice at once (force_released) and exits 1.
"""

import sys
import time

from redlock_client import Client, LockLost


def main(socket_path, resource):
    client = Client(socket_path)
    try:
        with client.hold(resource, ttl_ms=2000, wait_ms=5000, owner="example") as lock:
            print("held %s, valid for %d ms, renewed by the agent" % (resource, lock.validity_ms), flush=True)
            for step in range(600):
                lock.check()  # raises LockLost once the lock is lost
                time.sleep(0.1)  # one step of the work
        print("done; released")
        return 0
    except LockLost as e:
        print("stopped: %s" % e, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "nightly-report"))
