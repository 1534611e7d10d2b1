// replay.cpp: a main() for a fuzz target without libFuzzer. It feeds every file of the directories on its command line
// to LLVMFuzzerTestOneInput once, so the normal and the sanitizer test runs replay the committed seed corpora
// (tests/CMakeLists.txt registers one test per target). A crash input dropped into corpus/<target>/ becomes a
// regression test this way.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
    namespace fs = std::filesystem;
    std::vector<fs::path> files;
    for (int i = 1; i < argc; i++)
        for (const auto& e : fs::directory_iterator(argv[i]))
            if (e.is_regular_file()) files.push_back(e.path());
    std::sort(files.begin(), files.end()); // a stable order, so a failure names the same input every time
    for (const fs::path& p : files) {
        std::ifstream f(p, std::ios::binary);
        const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        std::fprintf(stderr, "%s\n", p.string().c_str()); // the input being run, should it crash
        LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
    }
    std::printf("%zu inputs replayed\n", files.size());
    return files.empty() ? 1 : 0;
}
