"""Where users reach the product: the IPython magics, their help, the command line."""
