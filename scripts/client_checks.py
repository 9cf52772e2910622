"""The check runner of the client checks (openai_client_check.py, mem0_client_check.py): one
line per check, 'N passed, N failed' at the end."""


class Checks:
    def __init__(self):
        self.results = []

    def check(self, name, fn):
        """Runs fn(); PASS with what it returns, FAIL with what it raised (and goes on)."""
        try:
            detail = fn()
            self.results.append(True)
            print(f"PASS {name}" + (f": {detail}" if detail else ""))
        except Exception as e:  # report and go on: one failing check must not hide the others
            self.results.append(False)
            print(f"FAIL {name}: {type(e).__name__}: {e}")

    def report(self) -> int:
        """Prints the counts; the exit status (0: all passed)."""
        passed = sum(self.results)
        print(f"{passed} passed, {len(self.results) - passed} failed")
        return 0 if passed == len(self.results) else 1
