"""Built-in reporters: json, markdown and junit."""
