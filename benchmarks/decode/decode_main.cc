// The `decode` binary: grove_decode_main (decode.cc) as a program.
extern "C" int grove_decode_main(int argc, char** argv);

int main(int argc, char** argv) { return grove_decode_main(argc, argv); }
