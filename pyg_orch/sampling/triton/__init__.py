r"""The Triton sampling path (GPU), imported by the backend registry on
demand."""
