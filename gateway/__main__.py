"""`python -m gateway`: the `slo-gateway` command."""

from gateway.cli import main

if __name__ == "__main__":
    main()
