def generate(path):
    raise NotImplementedError
