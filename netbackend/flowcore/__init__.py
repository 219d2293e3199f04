def load(required: bool = False):
    return None
