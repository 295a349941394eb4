// Built only where the system's stb has no compiled library (see CMakeLists.txt): the one
// translation unit that holds the stb_image / stb_image_write implementations.
#define STB_IMAGE_IMPLEMENTATION
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb_image.h>
#include <stb_image_write.h>
