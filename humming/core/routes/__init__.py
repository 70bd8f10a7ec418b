"""Routes: quantized-activation schemes run on the WnA16 kernels by an exact change of the activations."""
