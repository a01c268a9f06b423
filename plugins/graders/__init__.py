"""Built-in mechanical graders, one module per family."""
