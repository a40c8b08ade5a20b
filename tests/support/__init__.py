"""Helpers the tests share: the checkout, the kernel, stand-ins, a daemon under test."""
