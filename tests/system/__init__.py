"""Tests of the deployment with real parts (podman images, Prometheus): `make system`."""
