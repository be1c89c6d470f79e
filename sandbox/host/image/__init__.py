"""The sandbox image: its contents, its content-hash tag, and the two ways to build it
(a Dockerfile where a registry is reachable, an ``mmdebstrap`` rootfs where none is).
"""

from sandbox.host.image.build import ImageInfo, build_image, check_image

__all__ = ["ImageInfo", "build_image", "check_image"]
