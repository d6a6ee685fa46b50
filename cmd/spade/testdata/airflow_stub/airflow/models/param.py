class Param:
    def __init__(self, default=None, **kwargs):
        self.value = default
